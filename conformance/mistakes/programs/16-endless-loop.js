// mistake: a loop that never ends
let i = 0; while (true) { i++; }
