// mistake: imports a Node module
import { readFileSync } from "fs";
return readFileSync("/etc/hostname", "utf8");
