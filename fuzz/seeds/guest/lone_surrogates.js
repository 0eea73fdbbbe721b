console.log('a\ud800'); const r = await t.echo({['k\udc00']: 'v\ud800'}); 'b\udfff' + r
