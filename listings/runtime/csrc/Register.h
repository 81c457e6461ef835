#pragma once

namespace openreg {
void register_backend();
} // namespace openreg
