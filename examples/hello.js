// hello.js: a guest program calling the example tools of examples/tools.yaml.
// Run it with the execbox CLI:
//
//   cargo run --release -p execbox-cli --bin execbox -- run examples/hello.js --tools examples/tools.yaml
//
// Each provider of the tools file is a global namespace (`text`, `data`) and every tool
// returns a promise. A failing tool rejects with an Error whose `code` is the wire code.
const poem = "The quick brown fox\njumps over the lazy dog";

const counts = await text.word_count({ text: poem });
console.log("word_count:", counts);

const shout = await text.upper({ text: "hello from the sandbox" });
console.log("upper:", shout);

const capitals = [];
for (const country of ["France", "Japan", "Atlantis"]) {
  try {
    const { value } = await data.lookup({ key: country });
    capitals.push(`${country}: ${value}`);
  } catch (error) {
    console.log(`lookup failed (${error.code}):`, error.message);
  }
}

return { counts, shout, capitals };
