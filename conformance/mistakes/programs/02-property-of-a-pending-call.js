// mistake: reads a field of the Promise instead of the result
const s = math.stats({ values: [1, 2, 3] });
return { mean: s.mean };
