// mistake: uses the name the tool has upstream (with a hyphen), as its instructions do
return await math["get-sum"]({ a: 2, b: 3 });
