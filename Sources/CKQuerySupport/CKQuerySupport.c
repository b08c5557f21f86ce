// The support target is header-only; SwiftPM needs one source file to build it.
#include "CKQuerySupport.h"
