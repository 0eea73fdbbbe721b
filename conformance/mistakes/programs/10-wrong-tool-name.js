// mistake: calls a tool that does not exist in a namespace that does
return await math.average({ values: [1, 2, 3] });
