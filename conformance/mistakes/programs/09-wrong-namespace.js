// mistake: calls a namespace that does not exist
return await stats.mean({ values: [1, 2, 3] });
