Error.stackTraceLimit = { valueOf() { for (;;) {} } }; Error.captureStackTrace({}); new Error('x').stack
