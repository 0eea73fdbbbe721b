function probe() { return [typeof probe.caller, typeof arguments.callee.caller] } console.log({ get x() { return probe() } }); await t.echo({ get y() { return probe() } })
