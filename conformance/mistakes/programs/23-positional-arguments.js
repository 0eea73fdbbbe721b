// mistake: passes positional arguments instead of one object
return await math.add(2, 3);
