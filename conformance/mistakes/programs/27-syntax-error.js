// mistake: a syntax error on line 2
const a = 1;
const b = ;
return a + b;
