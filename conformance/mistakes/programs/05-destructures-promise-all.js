// mistake: destructures Promise.all without await
const [a, b] = Promise.all([math.add({ a: 1, b: 2 }), math.add({ a: 3, b: 4 })]);
return a + b;
