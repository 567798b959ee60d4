// Anchor source for the precompiled-header target; see pch.h.
