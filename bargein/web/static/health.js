// The server's readiness pill: /healthz every 3 s while the server warms up, every 30 s once it is ready.

/** Polls /healthz for ever, showing the answer on `pill` (data-state ready | warming | down). */
export async function pollHealth(pill) {
  let ready = false;
  try {
    const r = await fetch('/healthz', { cache: 'no-store' });
    const body = await r.json();
    ready = body.ready === true;
    pill.dataset.state = ready ? 'ready' : 'warming';
    pill.textContent = ready ? 'server ready' : 'server warming up';
  } catch {
    pill.dataset.state = 'down';
    pill.textContent = 'server unreachable';
  }
  setTimeout(() => pollHealth(pill), ready ? 30000 : 3000);
}
