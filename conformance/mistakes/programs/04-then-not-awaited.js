// mistake: a .then chain nobody awaits
math.add({ a: 1, b: 2 }).then((sum) => console.log("sum", sum));
return "done";
