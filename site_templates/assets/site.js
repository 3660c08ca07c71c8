// Draws every chart of the page: each div.chart names the JSON script element holding its plotly figure.
document.querySelectorAll("div.chart[data-figure]").forEach(function (div) {
  var figure = JSON.parse(document.getElementById(div.dataset.figure).textContent);
  Plotly.newPlot(div, figure.data, figure.layout, figure.config);
});
