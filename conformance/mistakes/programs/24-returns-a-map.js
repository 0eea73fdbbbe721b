// mistake: returns a Map
const counts = new Map([["a", 1], ["b", 2]]);
return counts;
