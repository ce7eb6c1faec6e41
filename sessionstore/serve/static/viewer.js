// Progressive enhancement only: every page works without this file.
// On a turn page, the left and right arrow keys go to the previous and next turn.
document.addEventListener("keydown", (event) => {
  if (event.target instanceof HTMLInputElement || event.altKey || event.ctrlKey || event.metaKey) return;
  const link = document.getElementById(event.key === "ArrowLeft" ? "prev" : event.key === "ArrowRight" ? "next" : "");
  if (link) window.location.assign(link.getAttribute("href"));
});
// Following a link to an operation of the timeline opens it.
function openTarget() {
  const target = window.location.hash && document.getElementById(window.location.hash.slice(1));
  if (target && target.tagName === "DETAILS") target.open = true;
}
window.addEventListener("hashchange", openTarget);
document.addEventListener("DOMContentLoaded", openTarget);
