await Promise.all(Array.from({length: 500}, (_, i) => t.echo(i)))
