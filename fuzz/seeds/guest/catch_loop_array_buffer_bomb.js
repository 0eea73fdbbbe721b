for(;;){ try { const a=[]; for(;;) a.push(new ArrayBuffer(1e6)) } catch(e) {} }
