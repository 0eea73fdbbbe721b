// Nested capabilities: each run is a child execution of this one, awaited for its result.
const stats = await capabilities.run({ name: "word-stats", params: { text: params.text } });
const report = await capabilities.run({
  name: "weekly-report",
  type: "report",
  params: { title: "Digest", items: [`${stats.words} words`, `most frequent: ${stats.top}`] },
});
report.markdown;
