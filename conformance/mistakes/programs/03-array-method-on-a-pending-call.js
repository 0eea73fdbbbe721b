// mistake: calls an array method on the Promise instead of the result
const keys = store.list({});
return keys.map((k) => k.toUpperCase());
