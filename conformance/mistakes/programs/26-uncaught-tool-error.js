// mistake: does not expect a tool to fail
return await store.get({ key: "missing" });
