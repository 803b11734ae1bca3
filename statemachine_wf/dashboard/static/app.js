// The dashboard's only script: confirmations before a state-changing form is sent, and
// the live DAG graph (server-sent events from /instances/{id}/stream).
"use strict";
document.addEventListener("DOMContentLoaded", () => {
  const dialog = document.getElementById("confirm");
  for (const form of document.querySelectorAll("form[data-confirm]")) {
    form.addEventListener("submit", (event) => {
      if (form.dataset.confirmed === "yes") return;
      event.preventDefault();
      document.getElementById("confirm-text").textContent = form.dataset.confirm;
      dialog.returnValue = "";
      dialog.onclose = () => {
        if (dialog.returnValue === "ok") { form.dataset.confirmed = "yes"; form.requestSubmit(); }
      };
      dialog.showModal();
    });
  }
  const box = document.getElementById("graph");
  if (box && box.dataset.stream && window.EventSource) {
    const source = new EventSource(box.dataset.stream);
    source.addEventListener("update", (message) => {
      const u = JSON.parse(message.data);
      if (u.node && u.node_status) {
        const g = box.querySelector(`g[data-node="${CSS.escape(u.node)}"]`);
        if (g) g.setAttribute("class", `node ${u.node_status}`);
      }
      const badge = document.getElementById("status");
      if (badge && u.status) { badge.textContent = u.status; badge.className = `badge status-${u.status}`; }
    });
    const stop = () => { source.close(); const live = document.getElementById("live"); if (live) live.textContent = "ended"; };
    source.addEventListener("end", stop);
    source.addEventListener("gone", stop);
  }
});
