// mistake: expects fetch
const response = await fetch("https://example.com/api");
return await response.json();
