"""Programs around the exported model: export it (`serving.export`), convert it for CTranslate2
(`serving.ctranslate2`), translate with it (`serving.translate`), and call a TensorFlow Serving
model server (`serving.client`). Importing them sets nothing up: each `main()` does."""
