// mistake: logs more lines than the limit keeps
for (let i = 0; i < 500; i++) console.log("line " + i);
return "logged";
