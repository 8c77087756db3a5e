// Starts Swagger UI on /docs with the server's own OpenAPI document (no inline script, so the
// page keeps a strict Content-Security-Policy). No validator badge: it would call out.
window.ui = SwaggerUIBundle({
  url: document.body.dataset.openapiUrl,
  dom_id: "#swagger-ui",
  layout: "BaseLayout",
  deepLinking: true,
  showExtensions: true,
  showCommonExtensions: true,
  validatorUrl: null,
  presets: [SwaggerUIBundle.presets.apis, SwaggerUIBundle.SwaggerUIStandalonePreset],
});
