// mistake: logs a huge object, then a line that matters
console.log(Array.from({ length: 20000 }, (_, i) => ({ i })));
console.log("the line that matters");
return "logged";
