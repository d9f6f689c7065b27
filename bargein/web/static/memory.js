// The memory panel: what the server remembers about the local user (GET /v1/memory), with a button to forget
// each item (DELETE /v1/memory/{id}). Loopback pages in local-only mode are allowed; with keys, the typed key is used.
const list = document.getElementById("memories");
const info = document.getElementById("memory-info");

function headers() {
  const key = document.getElementById("api-key")?.value.trim();
  return key ? { Authorization: `Bearer ${key}` } : {};
}

async function load() {
  const response = await fetch("/v1/memory", { headers: headers() });
  list.replaceChildren();
  if (!response.ok) {
    info.textContent = response.status === 503 ? "memory is off on this server" : "memory: not allowed";
    return;
  }
  const { data } = await response.json();
  info.textContent = data.length ? "" : "nothing remembered yet";
  for (const item of data) {
    const row = document.createElement("li");
    const when = new Date(item.updated_at * 1000).toISOString().slice(0, 10);
    row.textContent = `${item.text} (${when}) `;
    const forget = document.createElement("button");
    forget.type = "button";
    forget.textContent = "Forget";
    forget.addEventListener("click", async () => {
      await fetch(`/v1/memory/${item.id}`, { method: "DELETE", headers: headers() });
      load();
    });
    row.append(forget);
    list.append(row);
  }
}

document.getElementById("memory-refresh").addEventListener("click", load);
document.getElementById("disconnect").addEventListener("click", () => setTimeout(load, 500));
load();
