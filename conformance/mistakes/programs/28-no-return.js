// mistake: computes a value and forgets to return it
const sum = await math.add({ a: 1, b: 2 });
