"""Human pages of the fleet app (all login-required). The views live in
``views_overview`` (home page), ``views_host`` (host detail and charts) and
``views_settings`` (admin settings); this module keeps the historical names."""

from front.views_host import get_host_for_user, host_detail
from front.views_overview import overview

#: The overview replaced the plain hosts list at the same URL name.
host_list = overview

__all__ = ["get_host_for_user", "host_detail", "host_list", "overview"]
