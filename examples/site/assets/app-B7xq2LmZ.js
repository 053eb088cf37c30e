// Shows the requested path on the app shell, to make the wildcard route visible.
const target = document.getElementById("path");
if (target) {
  target.textContent = `You asked for ${window.location.pathname}; the wildcard page answered.`;
}
for (const link of document.querySelectorAll("a[href^='/']")) {
  link.addEventListener("mouseenter", () => {
    link.title = `GET ${link.getAttribute("href")}`;
  });
}
