// mistake: calls a rate-limited tool in a loop without looking at the refusal
const out = [];
for (let i = 0; i < 3; i++) {
  try {
    out.push(await limited.add({ a: i, b: 1 }));
  } catch (e) {
    out.push({ code: e.code, reason: e.reason, message: e.message });
  }
}
return out;
