// `params` is the capability's params; `text.split` is a tool of tools.yaml.
const { words } = await text.split({ text: params.text });
const counts = {};
for (const w of words) counts[w] = (counts[w] ?? 0) + 1;
const top = Object.entries(counts).sort((a, b) => b[1] - a[1])[0] ?? [null, 0];
return {
  result: { words: words.length, top: top[0], topCount: top[1] },
  additionalContext: { distinct: Object.keys(counts).length },
};
