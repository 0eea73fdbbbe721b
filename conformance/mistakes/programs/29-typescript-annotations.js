// mistake: none, TypeScript annotations are fine
const sum: number = await math.add({ a: 1, b: 2 });
return sum;
