// kiln's live preview (`kiln serve DIR --watch`): reloads this page when
// the site is rebuilt, or only swaps its stylesheets when stylesheets
// alone changed. Served at /_kiln/live.js to the preview's pages, never
// part of a site.
(() => {
  "use strict";
  if (window.__kilnLive) return;
  // What the page knows of the preview: the generation it shows, the
  // stream's state, the stylesheet swaps done (tests read this).
  const live = (window.__kilnLive = { id: null, state: "connecting", swaps: 0 });

  const sameOrigin = (url) => url.origin === location.origin;

  // Each stylesheet link whose path changed (all of them when none
  // matches: a changed file may be @import-ed; none when no path is
  // given: nothing a page sees changed) gets a new href; the old
  // link goes once the new one has loaded, so the page never shows
  // unstyled.
  const swapStylesheets = (paths) => {
    if (!paths.length) return;
    const links = [...document.querySelectorAll('link[rel~="stylesheet"][href]')].filter(
      (link) => sameOrigin(new URL(link.href, location.href)),
    );
    const path = (link) => decodeURIComponent(new URL(link.href, location.href).pathname);
    const changed = links.filter((link) => paths.includes(path(link)));
    for (const link of changed.length ? changed : links) {
      const url = new URL(link.href, location.href);
      url.searchParams.set("kiln-live", String(Date.now()));
      const next = link.cloneNode();
      next.href = url.href;
      const done = () => {
        link.remove();
        live.swaps += 1;
      };
      next.addEventListener("load", done, { once: true });
      next.addEventListener("error", done, { once: true });
      link.after(next);
    }
  };

  // The stream, while the page is shown: a hidden tab lets its go (over
  // HTTP/1.1 a browser opens at most six connections to a server, and
  // each open stream holds one), and opens it again once shown, its
  // hello telling whether anything changed meanwhile.
  let source = null;
  let retry = null;

  const connect = () => {
    if (source || document.hidden) return;
    source = new EventSource("/_kiln/events");
    source.onmessage = (event) => {
      let message;
      try {
        message = JSON.parse(event.data);
      } catch {
        return;
      }
      if (message.hello) {
        // A stream opened again (the tab shown again, the server
        // restarted, the connection dropped): what changed meanwhile is
        // shown.
        if (live.id !== null && live.id !== message.id) location.reload();
        live.id = message.id;
        live.state = "open";
      } else if (message.css) {
        live.id = message.id;
        swapStylesheets(message.css);
      } else if (message.reload) {
        live.id = message.id;
        location.reload();
      }
    };
    source.onerror = () => {
      live.state = "connecting";
      // EventSource retries by itself after a dropped connection; not
      // after a refusal (too many streams open, a server that is no
      // preview any more): then it is tried again here, slowly.
      if (source?.readyState === EventSource.CLOSED) {
        source = null;
        retry = setTimeout(connect, 5000);
      }
    };
  };

  const disconnect = () => {
    clearTimeout(retry);
    source?.close();
    source = null;
    live.state = "hidden";
  };

  document.addEventListener("visibilitychange", () => (document.hidden ? disconnect() : connect()));
  connect();
})();
