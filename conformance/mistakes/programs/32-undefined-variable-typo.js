// mistake: a typo in a local variable name
const total = await math.add({ a: 1, b: 2 });
return totl * 2;
