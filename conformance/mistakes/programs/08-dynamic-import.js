// mistake: imports a module dynamically
const { add } = await import("math");
return add(1, 2);
