// mistake: requires a Node module
const fs = require("fs");
return fs.readdirSync(".");
