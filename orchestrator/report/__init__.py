"""The report: four separate stages (image, host, device, sample) and its renderings (JSON, Markdown,
self-contained HTML, JUnit XML)."""
