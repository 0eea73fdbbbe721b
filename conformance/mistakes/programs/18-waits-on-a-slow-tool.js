// mistake: waits on a tool that takes longer than the time limit
return await alpha.slow({});
