// mistake: parses a result that is already a value
const s = JSON.parse(await math.stats({ values: [1, 2] }));
return s.mean;
