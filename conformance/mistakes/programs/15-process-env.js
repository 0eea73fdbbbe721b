// mistake: reads the environment
return process.env.HOME;
