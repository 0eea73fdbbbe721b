// mistake: returns a BigInt
return 2n ** 64n;
