// mistake: does arithmetic on a text result
const echoed = await alpha.echo({ text: "41 apples" });
return echoed + 1; // the count plus one
