"""The human pages composing fleet, audit, advice and alerts; nothing imports them."""
