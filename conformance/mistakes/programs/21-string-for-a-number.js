// mistake: passes a string where the schema wants a number
return await math.add({ a: "2", b: 3 });
