// The model page shows one setup at a time: the one the address names (#setup-…, or an element inside one), else
// the first (a GPU setup when there is one, else the newest). Without this script every setup shows, one after another.
function showSetup() {
  var sections = Array.prototype.slice.call(document.querySelectorAll("section.run"));
  if (sections.length === 0) return;
  var named = location.hash ? document.getElementById(decodeURIComponent(location.hash.slice(1))) : null;
  if (named && named.tagName === "DETAILS") named.open = true;  // a link to a folded part opens it
  var shown = (named && named.closest("section.run")) || sections[0];
  sections.forEach(function (section) { section.hidden = section !== shown; });
  var select = document.getElementById("setup-select");
  if (select) select.value = shown.id;
  drawVisible();
}

// Draws each chart when it first shows: plotly sizes a chart by its container, which has no width while hidden
// (another setup's section, a closed details).
function drawVisible() {
  document.querySelectorAll("div.chart[data-figure]:not(.drawn)").forEach(function (div) {
    if (div.offsetParent === null) return;
    var figure = JSON.parse(document.getElementById(div.dataset.figure).textContent);
    Plotly.newPlot(div, figure.data, figure.layout, figure.config);
    div.classList.add("drawn");
  });
}

var select = document.getElementById("setup-select");
if (select) select.addEventListener("change", function () { location.hash = select.value; });
window.addEventListener("hashchange", showSetup);
document.addEventListener("toggle", drawVisible, true);  // a details opened; toggle does not bubble, so capture it
showSetup();
