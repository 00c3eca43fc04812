"""The Shopify store's webhooks as a face: ``POST /shopify/webhooks`` and its worker side."""
