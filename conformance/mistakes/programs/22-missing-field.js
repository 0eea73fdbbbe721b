// mistake: leaves out a required field
return await math.add({ a: 2 });
