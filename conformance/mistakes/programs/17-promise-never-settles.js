// mistake: waits on a promise nothing settles
await new Promise(() => {});
return "never";
