Array.prototype.reverse.call({length: 2**53-1})
