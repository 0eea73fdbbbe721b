// mistake: writes started without await, and the program returns at once
// then: await store.list({})
store.put({ key: "a", value: 1 });
store.put({ key: "b", value: 2 });
return "queued";
