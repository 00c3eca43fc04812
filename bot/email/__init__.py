"""The email face: the inbound-parse webhook, mail parsing, replies over SMTP."""
