({ get x() { throw new Error('getter') } })
