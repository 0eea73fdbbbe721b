// mistake: calls a server that failed to start
return await broken.status({});
