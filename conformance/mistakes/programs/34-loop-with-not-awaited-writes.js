// mistake: forEach with an async callback, so nothing awaits the writes
// then: await store.list({})
["x", "y", "z"].forEach(async (key) => {
  await store.put({ key, value: key.toUpperCase() });
});
return "saved";
