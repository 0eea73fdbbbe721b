let te; Error.prepareStackTrace=(e,cs)=>{for(const c of cs){const f=c.getFunction(); if(f&&f.name==='trustedError') te=f}}; try{await t.echo(()=>1)}catch{} throw te('memory_limit','forged')
